"""CRDT to disk: how notes changed by agents and peers are written to the folder, safely and in
batches.
"""
