// The test load balancer (test/fixtures/test-lb.ts) does what the rollout and balancing tests
// rely on: TCP connections and UDP flows spread over live backends, a refused TCP backend
// skipped, an unready backend keeping its connections and flows but getting no new ones, a
// removed backend losing its flows, and replies of a flow reaching the client that sent it.
import t from 'tap'
import net, { type AddressInfo } from 'node:net'
import dgram from 'node:dgram'
import { TestLb } from '../fixtures/test-lb.ts'

/** A TCP server that answers every connection with its name, and a UDP one that echoes name:datagram. */
async function backend (t: { teardown (fn: () => unknown): void }, name: string, host: string): Promise<{ tcpPort: number, udpPort: number, tcp: net.Server }> {
  const tcp = net.createServer((socket) => { socket.on('error', () => {}); socket.end(name) })
  await new Promise<void>((resolve) => { tcp.listen(0, host, resolve) })
  const udp = dgram.createSocket('udp4')
  udp.on('message', (message, from) => { udp.send(`${name}:${message.toString()}`, from.port, from.address) })
  await new Promise<void>((resolve) => { udp.bind(0, host, resolve) })
  t.teardown(() => { tcp.close(); udp.close() })
  return { tcpPort: (tcp.address() as AddressInfo).port, udpPort: udp.address().port, tcp }
}

function tcpAnswer (port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    let data = ''
    socket.setEncoding('utf8').on('data', (chunk: string) => { data += chunk })
    socket.on('close', () => { resolve(data) })
    socket.on('error', reject)
  })
}

async function udpClient (t: { teardown (fn: () => unknown): void }, port: number): Promise<(text: string) => Promise<string>> {
  const socket = dgram.createSocket('udp4')
  await new Promise<void>((resolve) => { socket.bind(0, '127.0.0.1', resolve) })
  t.teardown(() => { socket.close() })
  return (text) => new Promise((resolve) => {
    socket.once('message', (reply) => { resolve(reply.toString()) })
    socket.send(text, port, '127.0.0.1')
  })
}

t.test('round-robin TCP placement, a refused backend skipped, an unready one avoided', async (t) => {
  const a = await backend(t, 'a', '127.0.93.1')
  const b = await backend(t, 'b', '127.0.93.2')
  const lb = await TestLb.start(t, { host: '127.0.0.1', choose: 'round-robin' })
  await lb.addBackend({ id: 'a', host: '127.0.93.1', tcpPort: a.tcpPort, udpPort: a.udpPort })
  await lb.addBackend({ id: 'b', host: '127.0.93.2', tcpPort: b.tcpPort, udpPort: b.udpPort })
  const answers = [await tcpAnswer(lb.tcpPort), await tcpAnswer(lb.tcpPort), await tcpAnswer(lb.tcpPort), await tcpAnswer(lb.tcpPort)]
  t.same(answers.sort(), ['a', 'a', 'b', 'b'], 'two each')
  await new Promise<void>((resolve) => { a.tcp.close(() => { resolve() }) })
  t.same([await tcpAnswer(lb.tcpPort), await tcpAnswer(lb.tcpPort)], ['b', 'b'], 'a refused port is skipped')
  await lb.setHealthy('b', false)
  t.same(await lb.live(), ['a'])
  t.equal(await tcpAnswer(lb.tcpPort), '', 'only a refusing backend is live: the client is closed')
})

t.test('a UDP flow keeps its backend; an unready backend keeps its flows; a removed one loses them', async (t) => {
  const a = await backend(t, 'a', '127.0.93.3')
  const b = await backend(t, 'b', '127.0.93.4')
  const lb = await TestLb.start(t, { host: '127.0.0.1', choose: 'round-robin' })
  await lb.addBackend({ id: 'a', host: '127.0.93.3', udpPort: a.udpPort })
  await lb.addBackend({ id: 'b', host: '127.0.93.4', udpPort: b.udpPort })
  const first = await udpClient(t, lb.udpPort)
  const owner = (await first('1')).split(':')[0] as string
  t.equal(await first('2'), `${owner}:2`, 'the flow stays on its backend')
  const other = owner === 'a' ? 'b' : 'a'
  await lb.setHealthy(owner, false)
  t.equal(await first('3'), `${owner}:3`, 'an unready backend keeps its flow')
  const second = await udpClient(t, lb.udpPort)
  t.equal(await second('1'), `${other}:1`, 'a new flow goes to the live backend')
  await lb.setHealthy(owner, true)
  await lb.removeBackend(owner)
  t.equal(await first('4'), `${other}:4`, 'a removed backend\'s flow picks again')
  t.same(await lb.stats(other), { tcpPlaced: 0, tcpOpen: 0, udpPlaced: 2, udpOpen: 2 })
})

t.test('a backend with a health URL is live only while it answers 200', async (t) => {
  let ready = true
  const health = net.createServer((socket) => {
    socket.on('error', () => {})
    socket.once('data', () => { socket.end(`HTTP/1.1 ${ready ? '200 OK' : '503 Service Unavailable'}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`) })
  })
  await new Promise<void>((resolve) => { health.listen(0, '127.0.93.5', resolve) })
  t.teardown(() => { health.close() })
  const lb = await TestLb.start(t, { host: '127.0.0.1', healthIntervalMs: 20 })
  await lb.addBackend({ id: 'a', host: '127.0.93.5', tcpPort: 1, healthUrl: `http://127.0.93.5:${(health.address() as AddressInfo).port}/readyz` })
  t.same(await lb.live(), ['a'])
  ready = false
  const deadline = Date.now() + 5000
  while ((await lb.live()).length > 0 && Date.now() < deadline) await new Promise((resolve) => { setTimeout(resolve, 20) })
  t.same(await lb.live(), [], 'down once it answers 503')
})
