# The echo interface the Cap'n Proto peer benchmark serves.
@0xc5d2b9e5a1f34d17;
interface Echo {
  call @0 (data :Data) -> (data :Data);
}
