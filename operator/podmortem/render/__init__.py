"""Renderers of the report: the HTML page and the SVG timeline, from the pure models of
podmortem.reports.
"""
