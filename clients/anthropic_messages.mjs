// Messages through the official @anthropic-ai/sdk client, streaming (the
// SDK's MessageStream helper) or not, over the conversations of the spec on
// stdin (see conversation.mjs). Trust for a private CA comes from
// NODE_EXTRA_CA_CERTS.

import Anthropic from '@anthropic-ai/sdk';
import { main, play, readSpec } from './conversation.mjs';

main(async () => {
  const spec = await readSpec();
  const client = new Anthropic({
    baseURL: spec.baseURL,
    apiKey: 'test-key',
    maxRetries: 0, // a failure must show, not be retried onto another engine
    timeout: 30_000,
  });
  await play(spec, async (conv, history) => {
    const params = {
      model: spec.model,
      system: conv.system,
      messages: history,
      max_tokens: spec.maxTokens,
    };
    if (!spec.stream) {
      const { data, response } = await client.messages.create(params).withResponse();
      return {
        upstream: response.headers.get(spec.upstreamHeader),
        text: textOf(data),
        chunks: 0,
        finish: data.stop_reason,
        usage: usageOf(data.usage),
      };
    }
    const { data: stream, response } = await client.messages.stream(params).withResponse();
    let chunks = 0;
    for await (const event of stream) {
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta' && event.delta.text) {
        chunks++;
      }
    }
    const message = await stream.finalMessage();
    return {
      upstream: response.headers.get(spec.upstreamHeader),
      text: textOf(message),
      chunks,
      finish: message.stop_reason,
      usage: usageOf(message.usage),
    };
  });
});

function textOf(message) {
  return message.content
    .filter((block) => block.type === 'text')
    .map((block) => block.text)
    .join('');
}

// usageOf reports prompt tokens as OpenAI counts them: Anthropic's
// input_tokens excludes the tokens read from the cache.
function usageOf(u) {
  if (!u) {
    return null;
  }
  return {
    promptTokens: u.input_tokens + (u.cache_read_input_tokens ?? 0),
    completionTokens: u.output_tokens,
    cachedTokens: u.cache_read_input_tokens ?? null,
  };
}
