"""The sanitizer: every check that turns a silent hardware failure into a report.

- :mod:`.overlap`: send/receive ranges that share bytes (the one overlap predicate);
- :mod:`.poison`: NaN / 0xFF in receive ranges until their round ran, so early reads show.
"""
