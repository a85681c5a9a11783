"""The provider side: the allow-list, LiteLLM calls, the fast path and its byte relay."""
