"""Example third-party ytk backend."""
