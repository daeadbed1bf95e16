package command

import "time"

// warmIdle is how long a goroutine of the readers and appliers pools (internal/warm) waits for
// work before it ends.
const warmIdle = time.Second
