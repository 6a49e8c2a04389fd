"""The composition root: the daemon's entry point and the runtime that starts and stops every part."""
