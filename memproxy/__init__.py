"""memproxy: an OpenAI-compatible LLM proxy that gives any app long-term memory."""

__version__ = "0.1.0"
