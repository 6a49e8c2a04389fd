"""The write path: the one service every write goes through, its unit of work, the changes it
announces, group commit, the records (log, search index), events, and the gate for what peers may
not hear yet.
"""
