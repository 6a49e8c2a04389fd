"""Live editing: Yjs clients of a note over the y-websocket protocol, and their one way into the write
path.
"""
