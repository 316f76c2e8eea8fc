#!/usr/bin/env bash
# A client of the caching proxy that is not the Python SDK: plain HTTP with curl, as a game
# engine's HTTP client (Unity's UnityWebRequest, Unreal's FHttpModule, fetch in a browser) sends
# it. It asks one NPC question twice: a miss, then a hit; then the same through headers alone,
# for clients that cannot add a body field.
#
#   python -m llmcache proxy --upstream openai --key "$LLMCACHE_PROXY_KEY" &
#   LLMCACHE_PROXY_KEY=... examples/proxy_client.sh
#
# LLMCACHE_PROXY_URL (default http://127.0.0.1:8400) and LLMCACHE_PROXY_MODEL (default
# gpt-4o-mini) say where and which model. The test suite runs this script against a proxy.
set -euo pipefail
url=${LLMCACHE_PROXY_URL:-http://127.0.0.1:8400}
key=${LLMCACHE_PROXY_KEY:?set LLMCACHE_PROXY_KEY to a key of the proxy}
model=${LLMCACHE_PROXY_MODEL:-gpt-4o-mini}

messages='[{"role": "system", "content": "You rate how important a memory is, 1-10."},
           {"role": "user", "content": "Memory: Tree in Victoria Park is Idle."}]'

# POST a chat completion; print how the proxy answered (its X-LLMCache headers) and the answer.
ask() {
  local body=$1
  shift
  local reply
  reply=$(curl --silent --show-error --fail-with-body --include \
    "$url/v1/chat/completions" \
    -H "Authorization: Bearer $key" -H "Content-Type: application/json" "$@" \
    --data-binary "$body")
  # Headers first (CRLF-terminated), then the body after the blank line.
  printf '%s\n' "$reply" | tr -d '\r' | grep -i '^x-llmcache' || true
  printf '%s\n' "$reply" | tr -d '\r' | sed -n '/^$/,$p' | grep -o '"content":"[^"]*"' | head -n 1
}

with_options="{\"model\": \"$model\", \"messages\": $messages,
  \"cache\": {\"category\": \"importance\", \"agent\": \"Liam Oliver\",
              \"keywords\": [\"Tree in Victoria Park is Idle\"]}}"
echo "-- first ask (cache options in the body)"
ask "$with_options"
echo "-- second ask"
ask "$with_options"

echo "-- the same through headers (text is percent-encoded UTF-8)"
ask "{\"model\": \"$model\", \"messages\": $messages}" \
  -H "X-LLMCache-Category: importance" \
  -H "X-LLMCache-Agent: Liam%20Oliver" \
  -H "X-LLMCache-Keywords: Tree%20in%20Victoria%20Park%20is%20Idle"
