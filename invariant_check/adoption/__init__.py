"""Linting a tree that has findings: suppression comments (read by every run), the baseline
file, and --add-noqa.
"""
