"""The sanitizer: every check that turns a silent hardware failure into a report.

- :mod:`.overlap`: send/receive ranges that share bytes (the one overlap predicate);
- :mod:`.sharing`: one buffer written by one emulated rank and used by another;
- :mod:`.poison`: NaN / 0xFF in receive ranges until their round ran, so early reads show.
"""
