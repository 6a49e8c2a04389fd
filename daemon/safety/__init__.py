"""What keeps destroyed text: the burst brake and the versions keeper, both listeners on the write
path.
"""
