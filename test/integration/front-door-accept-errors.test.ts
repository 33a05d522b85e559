// An accept error on a listening server (EMFILE when libuv's reserve descriptor is
// gone, ENFILE, ENOMEM) is emitted as 'error' on the server; with no listener it was an uncaught
// exception that ended the router. The front door and the health listener log it (rate-limited),
// count it and keep serving. The error is injected on the real listening servers: provoking it
// for real needs the reserve descriptor to be lost, which no test can arrange reliably (see
// test/faults/emfile.test.ts for what a real descriptor shortage does).
import t from 'tap'
import net from 'node:net'
import { startKubeRouter } from '../fixtures/kube-router.ts'

function listeningServer (port: number): net.Server {
  const handles = (process as unknown as { _getActiveHandles (): unknown[] })._getActiveHandles()
  const server = handles.find((h): h is net.Server => h instanceof net.Server && (h.address() as net.AddressInfo | null)?.port === port)
  if (server === undefined) throw new Error(`no listening server on port ${port}`)
  return server
}

function acceptError (code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`accept ${code}`), { code, errno: -24, syscall: 'accept' })
}

t.test('an accept error on the front door or the health listener is logged and counted, and both keep serving', async (t) => {
  const kr = await startKubeRouter(t)
  listeningServer(kr.router.frontDoor.port).emit('error', acceptError('EMFILE'))
  listeningServer(kr.router.health.port).emit('error', acceptError('ENFILE'))
  t.equal(await kr.metric('stargate_k8s_router_connections_refused_total', { listener: 'front_door', reason: 'accept_error' }), 1)
  t.equal(await kr.metric('stargate_k8s_router_connections_refused_total', { listener: 'health', reason: 'accept_error' }), 1)
  t.match(kr.logs.lines().find((l) => l.msg === 'front door accept error'), { code: 'EMFILE' })
  t.match(kr.logs.lines().find((l) => l.msg === 'health listener accept error'), { code: 'ENFILE' })
  t.equal((await kr.readyz()).status, 503, 'the health listener answers (not ready: no targets)')
  const watch = kr.watch()
  await watch.next(() => true, { message: 'a WatchStargates message from the front door' })
  t.pass('the front door answers')
})
