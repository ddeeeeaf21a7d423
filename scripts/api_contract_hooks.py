"""schemathesis hooks of scripts/api-contract.sh.

Each generated Idempotency-Key that the document allows gets a unique suffix, so no key is
reused with another request by chance. Reuse answers 422, as the document says, but it
would answer most POSTs before their handler runs and leave the handlers untested. Keys the
document forbids are sent as generated (they must be refused with a 400), and so is every
header of a negative case: changing one makes schemathesis read the case as positive again,
and a case meant to go without `Authorization` would then be sent with it.
"""

import re
import uuid

import schemathesis

# The header's schema in /api/v1/openapi.json: 1 to 255 characters, this pattern.
ALLOWED = re.compile(r"[\t -~]*[!-~][\t -~]*")


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.meta is not None and case.meta.generation.mode.is_negative:
        return
    headers = case.headers or {}
    for name, key in list(headers.items()):
        if name.lower() == "idempotency-key" and isinstance(key, str):
            if len(key) <= 255 and ALLOWED.fullmatch(key):
                headers[name] = key[:220] + "-" + uuid.uuid4().hex
