"""What every subsystem stands on: the event loop's time budget and its measurements, memory given
back, atomic files, timestamps, header deadlines.
"""
