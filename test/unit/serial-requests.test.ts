// The health port and the forwarder run an HTTP/1.1 connection's requests one at a time and
// close a connection that pipelines more than their bound (lib/serial-requests.ts).
import t from 'tap'
import { SerialRequests } from '../../lib/serial-requests.ts'

t.test('the first request runs, the next wait in order and run as each ends', async (t) => {
  const serial = new SerialRequests<object, string>(2)
  const conn = {}
  t.equal(serial.arrive(conn, 'a'), 'run')
  t.equal(serial.arrive(conn, 'b'), 'wait')
  t.equal(serial.arrive(conn, 'c'), 'wait')
  t.equal(serial.done(conn), 'b')
  t.equal(serial.done(conn), 'c')
  t.equal(serial.done(conn), null)
  t.equal(serial.arrive(conn, 'd'), 'run', 'an idle connection runs its next request at once')
})

t.test('one request over the bound closes the connection', async (t) => {
  const serial = new SerialRequests<object, number>(8)
  const conn = {}
  const arrivals = Array.from({ length: 10 }, (_, i) => serial.arrive(conn, i))
  t.same(arrivals, ['run', ...Array(8).fill('wait'), 'close'])
})

t.test('connections are independent', async (t) => {
  const serial = new SerialRequests<object, string>(0)
  const a = {}
  const b = {}
  t.equal(serial.arrive(a, 'a1'), 'run')
  t.equal(serial.arrive(b, 'b1'), 'run')
  t.equal(serial.arrive(a, 'a2'), 'close', 'no waiting room at 0')
  t.equal(serial.done(b), null)
})

t.test('a bound that is not a whole number is refused', async (t) => {
  t.throws(() => new SerialRequests(-1), /whole number/)
  t.throws(() => new SerialRequests(1.5), /whole number/)
})
