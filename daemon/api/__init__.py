"""The localhost HTTP API: the aiohttp app, browser safety and auth, REST routes, MCP, the owner's
routes.
"""
