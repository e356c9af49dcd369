"""Renderers: read a Lineage (and later a Profile), write text or pictures; change nothing."""
