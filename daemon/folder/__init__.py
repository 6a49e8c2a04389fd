"""The vault folder as a replica of its notes: the watcher, the bridge, rename detection, git's
activity, and the writer (CRDT to disk) in folder/writer/.
"""
