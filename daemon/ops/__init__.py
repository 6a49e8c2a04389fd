"""The operations people and agents call (notes, versions, snapshots, promotion, files), one
implementation behind REST, MCP, the CLI and the web page.
"""
