"""Tests of the Lily kernel, the ``%load_ext lily`` extension and the kernelspec install.

A package, so that ``support`` is importable as ``from .support import ...``
and these test modules never clash by basename with test modules elsewhere.
"""
