"""The streaming client: ``StreamingClient`` sends requests over a pool of keep-alive
connections and fills one ``RequestRecord`` per request, timed at the socket.

- ``config``: ``ClientConfig`` (its timeouts: conf.schema's ``ClientTimeouts``);
- ``transport``: connections, HTTP/1.1 framing (``http1``), kernel receive stamps
  (``stamped_socket``), timers and the pool;
- ``openai_stream``: the OpenAI event stream of one response (``sse`` framing);
- ``dialect``: the request bodies, in the engine's dialect.
"""

from loadgen.client.config import ClientConfig
from loadgen.client.transport import StreamingClient

__all__ = ["ClientConfig", "StreamingClient"]
