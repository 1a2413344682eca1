-- Wireshark dissector for CREM, the coded repair channel for RoCEv2 (crem-draft).
--
-- CREM has no assigned port: set the domain's CREM port in Preferences > Protocols > CREM,
-- or on the command line:
--   tshark -X lua_script:crem.lua -o crem.port:50000 -r capture.pcap -V
-- Field names follow the draft (crem.flow_id, crem.repair_index, ...), so display filters read
-- like the draft: crem.type == 6 && crem.fallback

local crem = Proto("crem", "CREM (Coded Repair for RDMA)")

local types = {
  [1] = "REPAIR", [2] = "HELLO", [3] = "HELLO_ACK", [4] = "PARAM_UPDATE", [5] = "PARAM_ACK",
  [6] = "REPAIR_REQUEST", [7] = "LOSS_REPORT", [8] = "PATH_REPORT", [9] = "CLOSE",
}
local schemes = { [0] = "Source Copy", [1] = "Cauchy Reed-Solomon", [2] = "XOR" }
local statuses = { [0] = "accepted", [1] = "unsupported scheme", [2] = "limits exceeded", [3] = "resources exhausted" }
local reasons = {
  [0] = "normal end", [1] = "idle timeout", [2] = "PARAM_UPDATE unanswered", [3] = "resources exhausted",
  [4] = "circuit breaker", [5] = "protocol error",
}
local causes = { [0] = "unknown", [1] = "congestion", [2] = "corruption", [3] = "other" }
local methods = { [1] = "Alternate Marking", [2] = "Clustered Alternate Marking", [3] = "node-local drop accounting" }

local f = crem.fields
f.version = ProtoField.uint8("crem.version", "Version", base.DEC, nil, 0xF0)
f.type = ProtoField.uint8("crem.type", "Type", base.DEC, types, 0x0F)
f.flags = ProtoField.uint8("crem.flags", "Flags", base.HEX)
f.retx = ProtoField.bool("crem.retx", "RETX", 8, nil, 0x80)
f.last = ProtoField.bool("crem.last", "LAST", 8, nil, 0x40)
f.info = ProtoField.bool("crem.info", "INFO", 8, nil, 0x20)
f.fallback = ProtoField.bool("crem.fallback", "FALLBACK", 8, nil, 0x20)
f.ranges = ProtoField.bool("crem.ranges", "RANGES", 8, nil, 0x10)
f.truncated = ProtoField.bool("crem.truncated", "Truncated", 8, nil, 0x80)
f.length = ProtoField.uint16("crem.length", "Length", base.DEC)
f.flow_id = ProtoField.uint32("crem.flow_id", "Flow ID", base.HEX)
f.config_id = ProtoField.uint8("crem.config_id", "Config ID", base.DEC)
f.scheme = ProtoField.uint8("crem.scheme", "Scheme", base.DEC, schemes)
f.k = ProtoField.uint8("crem.k", "k", base.DEC)
f.m = ProtoField.uint8("crem.m", "m", base.DEC)
f.t = ProtoField.uint16("crem.t", "T", base.DEC)
f.repair_index = ProtoField.uint8("crem.repair_index", "Repair Index", base.DEC)
f.block_start_psn = ProtoField.uint24("crem.block_start_psn", "Block Start PSN", base.DEC)
f.repair_session_id = ProtoField.uint16("crem.repair_session_id", "Repair Session ID", base.DEC)
f.symbol_length = ProtoField.uint16("crem.symbol_length", "Symbol Length", base.DEC)
f.present_bitmap = ProtoField.bytes("crem.present_bitmap", "Present Bitmap")
f.lost_source_bitmap = ProtoField.bytes("crem.lost_source_bitmap", "Lost Source Bitmap")
f.symbol = ProtoField.bytes("crem.symbol", "Repair Symbol")
f.flow_kind = ProtoField.uint8("crem.flow_kind", "Flow Kind", base.DEC, { [1] = "RoCEv2" })
f.af = ProtoField.uint8("crem.af", "AF", base.DEC)
f.supported_schemes = ProtoField.uint16("crem.supported_schemes", "Supported Schemes", base.HEX)
f.max_k = ProtoField.uint8("crem.max_k", "Max k", base.DEC)
f.max_m = ProtoField.uint8("crem.max_m", "Max m", base.DEC)
f.max_t = ProtoField.uint16("crem.max_t", "Max T", base.DEC)
f.rdma_mtu = ProtoField.uint16("crem.rdma_mtu", "RDMA MTU", base.DEC)
f.sender_nonce = ProtoField.uint64("crem.sender_nonce", "Sender Nonce", base.HEX)
f.source_address = ProtoField.ipv4("crem.source_address", "Source Address")
f.destination_address = ProtoField.ipv4("crem.destination_address", "Destination Address")
f.source_address6 = ProtoField.ipv6("crem.source_address6", "Source Address")
f.destination_address6 = ProtoField.ipv6("crem.destination_address6", "Destination Address")
f.flow_label = ProtoField.uint32("crem.flow_label", "Flow Label", base.HEX)
f.dest_qp = ProtoField.uint32("crem.dest_qp", "Destination QP", base.HEX, nil, 0x00FFFFFF)
f.max_open_blocks = ProtoField.uint16("crem.max_open_blocks", "Max Open Blocks", base.DEC)
f.effective_psn = ProtoField.uint24("crem.effective_psn", "Effective PSN", base.DEC)
f.status = ProtoField.uint8("crem.status", "Status", base.DEC, statuses)
f.repairs_held = ProtoField.uint8("crem.repairs_held", "Repairs Held r", base.DEC)
f.suggested_m = ProtoField.uint8("crem.suggested_m", "Suggested M", base.DEC)
f.request_id = ProtoField.uint16("crem.request_id", "Request ID", base.DEC)
f.range_count = ProtoField.uint16("crem.range_count", "Range Count", base.DEC)
f.range_start = ProtoField.uint24("crem.range_start_psn", "Start PSN", base.DEC)
f.range_len = ProtoField.uint8("crem.range_count_psns", "Count", base.DEC)
f.interval_us = ProtoField.uint32("crem.interval_us", "Interval (us)", base.DEC)
f.expected = ProtoField.uint32("crem.expected", "Expected", base.DEC)
f.received = ProtoField.uint32("crem.received", "Received", base.DEC)
f.restored = ProtoField.uint32("crem.restored", "Restored", base.DEC)
f.incomplete_blocks = ProtoField.uint32("crem.incomplete_blocks", "Incomplete Blocks", base.DEC)
f.ce_marked = ProtoField.uint32("crem.ce_marked", "CE Marked", base.DEC)
f.repairs_received = ProtoField.uint32("crem.repairs_received", "Repairs Received", base.DEC)
f.repairs_ce_marked = ProtoField.uint32("crem.repairs_ce_marked", "Repairs CE Marked", base.DEC)
f.method = ProtoField.uint8("crem.method", "Method", base.DEC, methods)
f.entry_count = ProtoField.uint8("crem.entry_count", "Entry Count", base.DEC)
f.node_id = ProtoField.uint32("crem.node_id", "Node ID", base.HEX)
f.marking_period = ProtoField.uint32("crem.marking_period_number", "Marking Period Number", base.DEC)
f.lost_count = ProtoField.uint32("crem.lost_count", "Lost Count", base.DEC)
f.queue_delay_change = ProtoField.int32("crem.queue_delay_change_us", "Queue Delay Change (us)", base.DEC)
f.cause = ProtoField.uint8("crem.cause", "Cause", base.DEC, causes)
f.psn_count = ProtoField.uint8("crem.psn_count", "PSN Count", base.DEC)
f.dropped_psn = ProtoField.uint24("crem.dropped_psn", "Dropped PSN", base.DEC)
f.reason = ProtoField.uint8("crem.reason", "Reason", base.DEC, reasons)

local e_short = ProtoExpert.new("crem.short", "Message shorter than its fields", expert.group.MALFORMED, expert.severity.ERROR)
local e_length = ProtoExpert.new("crem.length_mismatch", "Length differs from the datagram", expert.group.MALFORMED, expert.severity.ERROR)
crem.experts = { e_short, e_length }

crem.prefs.port = Pref.uint("CREM port", 0, "The domain's CREM UDP port (no default: the draft assigns none)")

local function words(k) return math.floor((k + 31) / 32) * 4 end

-- need returns true when len octets remain at off; otherwise it marks the message malformed.
local function need(buf, tree, off, len)
  if buf:len() < off + len then
    tree:add_proto_expert_info(e_short)
    return false
  end
  return true
end

local function addresses(buf, tree, off, af)
  local n = (af == 6) and 16 or 4
  if not need(buf, tree, off, 2 * n) then return nil end
  if af == 6 then
    tree:add(f.source_address6, buf(off, 16))
    tree:add(f.destination_address6, buf(off + 16, 16))
  else
    tree:add(f.source_address, buf(off, 4))
    tree:add(f.destination_address, buf(off + 4, 4))
  end
  return off + 2 * n
end

local body = {}

body[1] = function(buf, tree, flags) -- REPAIR
  if not need(buf, tree, 8, 12) then return end
  tree:add(f.config_id, buf(8, 1)); tree:add(f.scheme, buf(9, 1))
  tree:add(f.k, buf(10, 1)); tree:add(f.repair_index, buf(11, 1))
  tree:add(f.block_start_psn, buf(12, 3))
  tree:add(f.repair_session_id, buf(16, 2)); tree:add(f.symbol_length, buf(18, 2))
  local k, T, off = buf(10, 1):uint(), buf(18, 2):uint(), 20
  local w = words(k)
  if not need(buf, tree, off, w) then return end
  tree:add(f.present_bitmap, buf(off, w)); off = off + w
  if bit.band(flags, 0x80) ~= 0 then
    if not need(buf, tree, off, w) then return end
    tree:add(f.lost_source_bitmap, buf(off, w)); off = off + w
  end
  if T > 0 and need(buf, tree, off, T) then tree:add(f.symbol, buf(off, T)) end
  return string.format("k=%d i=%d PSN=%d", k, buf(11, 1):uint(), buf(12, 3):uint())
end

local function capabilities(buf, tree)
  if not need(buf, tree, 8, 12) then return false end
  tree:add(f.flow_kind, buf(8, 1)); tree:add(f.af, buf(9, 1)); tree:add(f.supported_schemes, buf(10, 2))
  tree:add(f.max_k, buf(12, 1)); tree:add(f.max_m, buf(13, 1)); tree:add(f.max_t, buf(14, 2))
  tree:add(f.rdma_mtu, buf(16, 2))
  return true
end

body[2] = function(buf, tree) -- HELLO
  if not capabilities(buf, tree) or not need(buf, tree, 20, 8) then return end
  tree:add(f.sender_nonce, buf(20, 8))
  local off = addresses(buf, tree, 28, buf(9, 1):uint())
  if off and need(buf, tree, off, 4) then
    tree:add(f.flow_label, buf(off, 4)); tree:add(f.dest_qp, buf(off, 4))
    return string.format("QP 0x%06x", bit.band(buf(off, 4):uint(), 0xFFFFFF))
  end
end

body[3] = function(buf, tree) -- HELLO_ACK
  if not capabilities(buf, tree) or not need(buf, tree, 20, 12) then return end
  tree:add(f.sender_nonce, buf(20, 8)); tree:add(f.max_open_blocks, buf(28, 2))
end

body[4] = function(buf, tree) -- PARAM_UPDATE
  if not need(buf, tree, 8, 12) then return end
  tree:add(f.config_id, buf(8, 1)); tree:add(f.scheme, buf(9, 1)); tree:add(f.k, buf(10, 1))
  tree:add(f.m, buf(11, 1)); tree:add(f.t, buf(12, 2)); tree:add(f.effective_psn, buf(16, 3))
  return string.format("config %d: k=%d m=%d T=%d", buf(8, 1):uint(), buf(10, 1):uint(), buf(11, 1):uint(), buf(12, 2):uint())
end

body[5] = function(buf, tree) -- PARAM_ACK
  if not need(buf, tree, 8, 4) then return end
  tree:add(f.config_id, buf(8, 1)); tree:add(f.status, buf(9, 1))
end

body[6] = function(buf, tree, flags) -- REPAIR_REQUEST
  if bit.band(flags, 0x10) ~= 0 then
    if not need(buf, tree, 8, 4) then return end
    tree:add(f.request_id, buf(8, 2)); tree:add(f.range_count, buf(10, 2))
    local n, off = buf(10, 2):uint(), 12
    for _ = 1, n do
      if not need(buf, tree, off, 4) then return end
      tree:add(f.range_start, buf(off, 3)); tree:add(f.range_len, buf(off + 3, 1)); off = off + 4
    end
    return string.format("%d ranges", n)
  end
  if not need(buf, tree, 8, 12) then return end
  tree:add(f.config_id, buf(8, 1)); tree:add(f.scheme, buf(9, 1)); tree:add(f.k, buf(10, 1))
  tree:add(f.repairs_held, buf(11, 1)); tree:add(f.block_start_psn, buf(12, 3))
  tree:add(f.suggested_m, buf(15, 1)); tree:add(f.request_id, buf(16, 2))
  local w = words(buf(10, 1):uint())
  if need(buf, tree, 20, w) then tree:add(f.lost_source_bitmap, buf(20, w)) end
  return string.format("PSN=%d r=%d M_s=%d", buf(12, 3):uint(), buf(11, 1):uint(), buf(15, 1):uint())
end

body[7] = function(buf, tree) -- LOSS_REPORT
  if not need(buf, tree, 8, 32) then return end
  local fields = { f.interval_us, f.expected, f.received, f.restored, f.incomplete_blocks,
    f.ce_marked, f.repairs_received, f.repairs_ce_marked }
  for i, field in ipairs(fields) do tree:add(field, buf(8 + 4 * (i - 1), 4)) end
  return string.format("expected %d received %d", buf(12, 4):uint(), buf(16, 4):uint())
end

body[8] = function(buf, tree) -- PATH_REPORT
  if not need(buf, tree, 8, 4) then return end
  tree:add(f.method, buf(8, 1)); tree:add(f.entry_count, buf(9, 1)); tree:add(f.af, buf(10, 1))
  local off = addresses(buf, tree, 12, buf(10, 1):uint())
  if not off or not need(buf, tree, off, 4) then return end
  tree:add(f.flow_label, buf(off, 4)); off = off + 4
  for e = 1, buf(9, 1):uint() do
    if not need(buf, tree, off, 20) then return end
    local hop = tree:add(crem, buf(off, 20 + 4 * buf(off + 17, 1):uint()), "Hop Entry " .. e)
    hop:add(f.node_id, buf(off, 4)); hop:add(f.marking_period, buf(off + 4, 4))
    hop:add(f.lost_count, buf(off + 8, 4)); hop:add(f.queue_delay_change, buf(off + 12, 4))
    hop:add(f.cause, buf(off + 16, 1)); hop:add(f.psn_count, buf(off + 17, 1))
    local n = buf(off + 17, 1):uint(); off = off + 20
    for _ = 1, n do
      if not need(buf, hop, off, 4) then return end
      hop:add(f.dropped_psn, buf(off + 1, 3)); off = off + 4
    end
  end
end

body[9] = function(buf, tree) -- CLOSE
  if need(buf, tree, 8, 4) then tree:add(f.reason, buf(8, 1)) end
end

function crem.dissector(buf, pinfo, root)
  if buf:len() < 8 then return 0 end
  local version, typ = bit.rshift(buf(0, 1):uint(), 4), bit.band(buf(0, 1):uint(), 0x0F)
  if version ~= 1 or types[typ] == nil then return 0 end -- the draft: discard
  pinfo.cols.protocol = "CREM"
  local tree = root:add(crem, buf(), "CREM " .. types[typ])
  tree:add(f.version, buf(0, 1)); tree:add(f.type, buf(0, 1))
  local flags = buf(1, 1):uint()
  local ft = tree:add(f.flags, buf(1, 1))
  if typ == 1 then ft:add(f.retx, buf(1, 1)); ft:add(f.last, buf(1, 1)); ft:add(f.info, buf(1, 1))
  elseif typ == 6 then ft:add(f.fallback, buf(1, 1)); ft:add(f.ranges, buf(1, 1))
  elseif typ == 8 then ft:add(f.truncated, buf(1, 1)) end
  local lt = tree:add(f.length, buf(2, 2))
  if buf(2, 2):uint() ~= buf:len() then lt:add_proto_expert_info(e_length) end
  tree:add(f.flow_id, buf(4, 4))
  local summary = body[typ](buf, tree, flags)
  pinfo.cols.info = types[typ] .. " flow 0x" .. string.format("%08x", buf(4, 4):uint()) .. (summary and (" " .. summary) or "")
  return buf:len()
end

local registered = 0
function crem.prefs_changed()
  local udp = DissectorTable.get("udp.port")
  if registered ~= 0 then udp:remove(registered, crem) end
  registered = crem.prefs.port
  if registered ~= 0 then udp:add(registered, crem) end
end
