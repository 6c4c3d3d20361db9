"""The bench smoke tier: every script of bench/ at a tiny N (make bench-smoke)."""
