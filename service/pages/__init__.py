"""The customer chat page and the operator console: plain HTML and JS, no build step."""
