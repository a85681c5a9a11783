"""Embedder families, one module each; ``memproxy.index.embedder`` picks one from config."""
