/**
 * Found by the Chromium test of WebTransport over HTTP/3 (Chromium often sends a stream's FIN
 * in a packet of its own): a TypeScript-mode stream whose FIN arrives after its last byte was read must end
 * cleanly. The addon frees a finished stream once every byte is read, which could be before
 * read() returned READ_FIN; the stream then looked closed by its connection and readers
 * (QuicDuplex, the HTTP/3 glue) reported an error for a complete stream.
 */
import t from 'tap'
import { dial, engineTls, established, listen, nextStream, readToEnd } from '../fixtures/quic-engine.ts'
import { QuicDuplex } from '../../lib/quic/stream-duplex.ts'

t.test('a FIN sent well after the data ends the peer\'s stream cleanly, in both stream APIs', async (t) => {
  const tls = await engineTls(t)
  const server = listen(t, '127.0.3.41', tls.serverCredentials)
  for (const api of ['QuicStream', 'QuicDuplex'] as const) {
    for (let run = 0; run < 10; run++) {
      const client = dial(t, '127.0.3.41', server.endpoint.port, { credentials: tls.clientCredentials })
      await established(client)
      const conn = server.connections.at(-1)
      if (conn === undefined) return t.fail('no server connection')
      const atServer = nextStream(conn)
      const stream = client.openStream(true)
      if (stream === null) return t.fail('no stream')
      stream.write(Buffer.from('the whole message'))
      const peer = await atServer
      peer.end() // the server's side is done: the stream closes as soon as the client's FIN is in
      const reading = api === 'QuicStream'
        ? readToEnd(peer).then((r) => ({ data: r.data.toString(), end: r.end }))
        : (async () => {
            const duplex = new QuicDuplex(peer)
            const chunks: Buffer[] = []
            try {
              for await (const chunk of duplex) chunks.push(chunk as Buffer)
              return { data: Buffer.concat(chunks).toString(), end: 'fin' }
            } catch (err) {
              return { data: Buffer.concat(chunks).toString(), end: (err as Error).message }
            }
          })()
      await new Promise((resolve) => { setTimeout(resolve, 30) })
      stream.end()
      t.same(await reading, { data: 'the whole message', end: 'fin' }, `${api}, run ${run}`)
      client.close(0, 'done')
    }
  }
})
