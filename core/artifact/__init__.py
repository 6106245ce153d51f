"""Compiled models on disk: the artifact format and its checks, loading, the code cache, the user's signing key and private directories."""
