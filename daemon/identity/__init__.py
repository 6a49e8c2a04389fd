"""This device's identity and secrets: its key and certificate, the keyring, the secrets read at start."""
