"""Serving stored versions over HTTP (``python -m workbench serve``).

The services here are plain workbench functions that every front end calls: which version
answers for a language pair (``served``) and the API keys (``api_keys``). The HTTP front end
sits beside them: ``http_app`` (the FastAPI routes: LibreTranslate's protocol and ``/v1``) with
``runtime`` (what one server process holds, and the request middleware), ``protocol`` (request
shapes and parsing), ``batching`` (concurrent requests share decoder batches), ``limits``
(per-key rates and sizes), ``metrics`` (Prometheus text) and ``entry`` (the ``serve`` entry
point: uvicorn); ``launcher`` starts that server for the Models page and tells its state. Importing
this package loads none of FastAPI, so the UI and the CLI stay light.
"""
