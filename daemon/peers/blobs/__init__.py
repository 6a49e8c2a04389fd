"""Attachment blobs between peers: the fetcher, serving under credit, and the blob channel off the main
loop.
"""
