"""The example's handler package."""
