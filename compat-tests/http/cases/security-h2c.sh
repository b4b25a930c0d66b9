# shellcheck shell=bash
# The plaintext HTTP listener of run.sh's broker: HTTP/1.1 and HTTP/2 by prior knowledge (h2c);
# no authentication configured, so the API answers anonymous callers, with Confluent's error bodies.

PROBE=/millrace-test-no-such-route
# http_version PATH CURL_ARGS...: prints curl's %{http_version} of one GET
http_version() {
  local path="$1"
  shift
  curl -sS -o /dev/null -w '%{http_version}' --max-time "${HTTP_TIMEOUT:-30}" "$@" "$BASE$path" 2>>"$CASE_WORK/curl.err"
}

check security-h2c-prior-knowledge test "$(http_version /health --http2-prior-knowledge)" = 2
check security-h2c-http1 test "$(http_version /health --http1.1)" = 1.1
req GET "$PROBE" --http2-prior-knowledge
expect_status security-h2c-api-anonymous 404
expect_jq security-h2c-404-body '.error_code == 404'
req GET /health -u nobody:nothing
expect_status security-h2c-basic-ignored-without-authentication 200
