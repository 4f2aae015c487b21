"""Environments across a process boundary: ``ragen serve-env`` and ``env=remote``.

Two servers of any registered env: ragen's own JSON protocol over HTTP
(``http_server``) and OpenEnv's HTTP + WebSocket API (``openenv_server``), which share
what every server enforces (``rules``: token, body and connection limits, one-line
errors) and how env values travel as JSON (``wire``). ``remote`` is the client of the
first, an env like any other (``env=remote env.config.url=...``); the client of an
OpenEnv server is an adapter (:mod:`ragen.envs.adapters.openenv_client`).
"""
