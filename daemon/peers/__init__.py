"""Peers: discovery, dialing, TLS, the join handshake, one sync session per link; blob transfer in
peers/blobs/.
"""
