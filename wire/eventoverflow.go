package wire

// EventOverflow tells a session that the master dropped handle events it
// had no room to queue for it (the session did not fetch them fast
// enough). It stands where the first dropped event would have been, and
// for every one dropped after it while no reply has carried it yet; Path
// and Handle name the first. The client tells every handle stream to
// re-read, since it cannot know which handles lost events.
const EventOverflow uint8 = 11
