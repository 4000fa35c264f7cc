"""Typed skills: declarations, the action flow, the Config Registry, activities, contacts."""
