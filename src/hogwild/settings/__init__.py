"""The settings: their schema and rules, where they are loaded from, and the rendered settings file."""
