{
  "targets": [
    {
      "target_name": "quic",
      "sources": [
        "src/addon.c",
        "src/engine.c",
        "src/endpoint.c",
        "src/conn.c",
        "src/stream.c",
        "src/bridge.c",
        "src/drain.c",
        "src/frames.c",
        "src/initial.c",
        "src/tls.c",
        "src/map.c"
      ],
      "defines": ["NAPI_VERSION=8", "_GNU_SOURCE"],
      "cflags_c": [
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        "-Wno-missing-field-initializers",
        "<!@(pkg-config --cflags libngtcp2 libngtcp2_crypto_gnutls gnutls)",
        "<!@(node -p \"process.env.QUIC_CFLAGS || ''\")"
      ],
      "ldflags": ["<!@(node -p \"process.env.QUIC_LDFLAGS || ''\")"],
      "libraries": ["<!@(pkg-config --libs libngtcp2 libngtcp2_crypto_gnutls gnutls)"]
    }
  ]
}
