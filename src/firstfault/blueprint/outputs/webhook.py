"""Webhook output: POSTs each result's JSON (`AttributionBlueprintResult`) to a URL, signed.

Every try carries `Firstfault-Signature: t=<unix seconds>,v1=<hex>`, where `<hex>` is the lowercase hex
HMAC-SHA256, keyed with the secret (UTF-8), of `<t>` (the same decimal text), a `.`, and the exact bytes of the
body. The time is part of what is signed, so a receiver that rejects a `t` too far from its clock (5 minutes,
say) refuses a replayed request; each retry is signed anew. `Firstfault-Delivery` is the same on every try of
one result (the SHA-256 of its body, hex), for receivers that drop duplicates. docs/blueprint.md shows how a
receiver checks both. Retries: `delivery.py`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from dataclasses import dataclass

from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.options import LabelOptions, option, parse_options
from firstfault.blueprint.outputs.alerts import is_clean, is_infrastructure
from firstfault.blueprint.outputs.delivery import DeliveryOptions, Sender, check_delivery, check_url
from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.engine import ExecutionContext
from firstfault.errors import ConfigError, OutputError

SIGNATURE_HEADER = "Firstfault-Signature"
DELIVERY_HEADER = "Firstfault-Delivery"
SIGNATURE_VERSION = "v1"


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The `Firstfault-Signature` value for `body` sent at `timestamp`."""
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},{SIGNATURE_VERSION}={digest}"


@dataclass(frozen=True)
class WebhookOptions(DeliveryOptions, LabelOptions):
    url: str | None = option(None, "where each result is POSTed", required=True)
    secret_env: str | None = option(None, "the environment variable holding the HMAC secret (never the secret "
                                          "itself: options show up in process listings)", required=True)
    send: str = option("all", "which results: `all`, `failures` (every result but a `Pass`, and those that could "
                              "not be attributed) or `infrastructure` (infrastructure faults only)",
                       choices=["all", "failures", "infrastructure"])


class WebhookOutput:
    kind = "output"
    Options = WebhookOptions

    def __init__(self, spec: ConnectorSpec) -> None:
        options = parse_options(WebhookOptions, spec)
        where = f"output {spec.name}"
        check_delivery(options, where)
        assert options.url is not None and options.secret_env is not None   # required
        secret = os.environ.get(options.secret_env, "")
        if not secret:
            raise ConfigError(f"{where}: option `secret_env` names {options.secret_env}, which is not set or empty; "
                              "export the webhook's secret in it")
        self.label = options.label or spec.name
        self.url = check_url(options.url, where)
        self.send = options.send
        self.secret = secret.encode()
        self.sender = Sender.of(options)

    def already_attributed(self, ctx: ExecutionContext) -> bool:
        return False

    def wanted(self, result: AttributionBlueprintResult) -> bool:
        if self.send == "infrastructure":
            return is_infrastructure(result.diagnosis)
        return self.send == "all" or not is_clean(result.diagnosis)

    def write(self, result: AttributionBlueprintResult) -> None:
        if not self.wanted(result):
            return
        body = result.model_dump_json().encode()
        delivery_id = hashlib.sha256(body).hexdigest()

        def headers() -> dict[str, str]:
            return {"Content-Type": "application/json", DELIVERY_HEADER: delivery_id,
                    SIGNATURE_HEADER: signature(self.secret, int(time.time()), body)}

        delivery = self.sender.post(self.url, body, headers)
        if not delivery.ok:
            ctx = result.context
            raise OutputError(f"POST {self.url}: the result of {ctx.workload_id} attempt {ctx.attempt} was not "
                              f"delivered ({delivery.detail})")

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.sender.close()
