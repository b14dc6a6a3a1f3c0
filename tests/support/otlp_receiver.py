"""An OTLP/HTTP trace receiver for the tests, on loopback: what a collector's OTLP receiver does
with `POST /v1/traces` (protobuf, gzip or not), answered as the OTLP/HTTP specification says,
decoded with the OpenTelemetry project's own generated classes (PyPI `opentelemetry-proto`).

Usage: otlp_receiver.py DIR. Prints `listening on PORT` once it accepts connections. Every request
it receives, whatever its path, becomes a line of DIR/requests.jsonl (method, path, content type,
and for a trace export the request in OTLP/JSON form: ids in hex), and its raw body is appended
to DIR/raw.bin. A request is written down before it is answered.
"""

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = Path(sys.argv[1])
LOCK = threading.Lock()


def otlp_json(request):
    """The request as OTLP/JSON: protobuf's JSON mapping, but trace and span ids in hex."""
    doc = MessageToDict(request)
    for rs, rs_doc in zip(request.resource_spans, doc.get("resourceSpans", [])):
        for ss, ss_doc in zip(rs.scope_spans, rs_doc.get("scopeSpans", [])):
            for span, span_doc in zip(ss.spans, ss_doc.get("spans", [])):
                span_doc["traceId"] = span.trace_id.hex()
                span_doc["spanId"] = span.span_id.hex()
                span_doc["parentSpanId"] = span.parent_span_id.hex()
                for link, link_doc in zip(span.links, span_doc.get("links", [])):
                    link_doc["traceId"] = link.trace_id.hex()
                    link_doc["spanId"] = link.span_id.hex()
    return doc


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def record(self, body, export=None):
        line = {
            "method": self.command,
            "path": self.path,
            "content_type": self.headers.get("content-type"),
            "export": export,
        }
        with LOCK:
            with open(OUT / "requests.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
            with open(OUT / "raw.bin", "ab") as f:
                f.write(body)

    def answer(self, status, body=b"", content_type="application/x-protobuf"):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        return body

    def do_POST(self):
        body = self.read_body()
        if self.path != "/v1/traces":
            self.record(body)
            return self.answer(404, b"not found", "text/plain")
        if self.headers.get("content-type") != "application/x-protobuf":
            self.record(body)
            return self.answer(415, b"only application/x-protobuf", "text/plain")
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as e:  # the exporter sent something that is not OTLP
            self.record(body)
            return self.answer(400, str(e).encode(), "text/plain")
        self.record(body, otlp_json(request))
        self.answer(200, ExportTraceServiceResponse().SerializeToString())

    def do_GET(self):
        self.record(b"")
        self.answer(405, b"POST only", "text/plain")

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()
