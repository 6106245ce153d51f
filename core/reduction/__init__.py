"""Placeholder package; filled by later stages of the pipeline."""
