// Chat completions through the official openai client, streaming or not,
// over the conversations of the spec on stdin (see conversation.mjs).
// Trust for a private CA comes from NODE_EXTRA_CA_CERTS.

import OpenAI from 'openai';
import { main, play, readSpec } from './conversation.mjs';

main(async () => {
  const spec = await readSpec();
  const client = new OpenAI({
    baseURL: new URL('/v1', spec.baseURL).href,
    apiKey: 'test-key',
    maxRetries: 0, // a failure must show, not be retried onto another engine
    timeout: 30_000,
  });
  await play(spec, async (conv, history) => {
    const params = {
      model: spec.model,
      messages: [{ role: 'system', content: conv.system }, ...history],
      max_tokens: spec.maxTokens,
    };
    if (!spec.stream) {
      const { data, response } = await client.chat.completions.create(params).withResponse();
      return {
        upstream: response.headers.get(spec.upstreamHeader),
        text: data.choices[0]?.message?.content ?? '',
        chunks: 0,
        finish: data.choices[0]?.finish_reason ?? null,
        usage: usageOf(data.usage),
      };
    }
    const { data: stream, response } = await client.chat.completions
      .create({ ...params, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let text = '';
    let chunks = 0;
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        if (choice.delta?.content) {
          text += choice.delta.content;
          chunks++;
        }
        finish = choice.finish_reason ?? finish;
      }
      if (chunk.usage) {
        usage = usageOf(chunk.usage);
      }
    }
    return { upstream: response.headers.get(spec.upstreamHeader), text, chunks, finish, usage };
  });
});

function usageOf(u) {
  if (!u) {
    return null;
  }
  return {
    promptTokens: u.prompt_tokens,
    completionTokens: u.completion_tokens,
    cachedTokens: u.prompt_tokens_details?.cached_tokens ?? null,
  };
}
