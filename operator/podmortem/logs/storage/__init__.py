"""The log store: segment files, cursors, retention, quarantine, and reading lines back. Never imports
the following side.
"""
