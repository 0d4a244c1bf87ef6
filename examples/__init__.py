"""examples package."""
