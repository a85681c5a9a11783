"""memproxy: an OpenAI-compatible LLM proxy that gives any app long-term memory."""

from importlib.metadata import PackageNotFoundError, version

try:  # the one version is pyproject.toml's, as installed
    __version__ = version("memproxy")
except PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+source"
