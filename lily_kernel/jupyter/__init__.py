"""The Jupyter face: kernel, kernelspec install, IPython integration, widgets and display."""
