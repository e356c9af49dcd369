"""``BundleError``: a bundle that cannot run here, said in one line (what the runner's
command line prints for it, where every other failure is named as damage)."""

from __future__ import annotations


class BundleError(Exception):
    """A bundle that cannot run here, said in one line."""
