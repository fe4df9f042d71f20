"""Tuning: pass costs measured on this machine (`costs`, kept in `store`), the choice of k
(`k`) and of a token tree (`tree`) from them. Used by the public API (`specjax.api`) and
the applications, never by decoding.
"""
