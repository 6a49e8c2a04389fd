"""``python -m stet.client``: the ``stet`` command (what `stet mcp-config --client claude-desktop`
names when no ``stet`` script sits beside the Python)."""

from .cli import main

main()
