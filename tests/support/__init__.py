"""What the tests share: the lab as processes (lab.py) or in process (inproc.py), raw
clients and SSE readers, fake clients and bridges, Docker and browser helpers. No test
module imports another; each imports what it shares from here."""
