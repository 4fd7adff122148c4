"""Tests of the trainer algorithms, checked against values worked out by hand."""
