"""The HTTP service for many users: the app (``http``), token checks bound to scopes
(``auth``), the limits (``limits``) and one access-log line per call (``access_log``)."""
