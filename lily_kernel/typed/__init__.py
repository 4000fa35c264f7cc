"""Typed skills: a call's values checked, the action flow, the Config Registry, activities, contacts."""
