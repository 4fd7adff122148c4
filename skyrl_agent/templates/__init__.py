"""Chat templates shipped with the runtime (Jinja2 sources)."""
