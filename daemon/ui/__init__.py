"""The web page at /ui/: its routes, sessions, HTML, and its templates and static files (package data)."""
