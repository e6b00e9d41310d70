"""Resumable streams: the event store, GET-stream tracking, and Last-Event-ID replay."""
